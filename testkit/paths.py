"""Where the repository is, and the shared real CTR data beside it (never copied into it)."""

from __future__ import annotations

from pathlib import Path

#: The repository's root.
ROOT = Path(__file__).resolve().parents[1]
#: ``../shared/data`` beside the repository, where the data README says it is.
DATA_DIR = ROOT.parent / "shared" / "data"
#: The Criteo head file: 10,000 rows of the Kaggle training set.
CRITEO = DATA_DIR / "criteo" / "criteo_kaggle_train_head10k.tsv"
