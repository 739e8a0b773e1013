"""The tables ``online-ctr models list`` prints: the models, then the groups."""

from __future__ import annotations

from collections.abc import Sequence

from service.api.model_schemas import GroupResponse, ModelListResponse, ModelSummary


def print_listing(listing: ModelListResponse) -> None:
    """Print the models (``*`` marks the own one, OCTR_MODEL) and the groups."""
    print_table(("model", "rule", "group", "own"), [_model_row(m) for m in listing.models])
    if listing.groups:
        print()
        header = ("group", "models", "serving", "split", "join window")
        print_table(header, [_group_row(g) for g in listing.groups])


def print_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> None:
    """Print ``rows`` under ``header`` in left-aligned columns two spaces apart."""
    widths = [max(len(row[i]) for row in (header, *rows)) for i in range(len(header))]
    for row in (header, *rows):
        print(
            "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        )


def _model_row(model: ModelSummary) -> tuple[str, ...]:
    return (model.name, model.rule, model.group or "-", "*" if model.own else "")


def _group_row(group: GroupResponse) -> tuple[str, ...]:
    split = ",".join(f"{name}={weight:g}" for name, weight in sorted(group.split.items())) or "-"
    window = (
        f"{group.join_window_s}s, unlabeled {group.unlabeled}" if group.join_window_s else "off"
    )
    return (group.name, ",".join(group.models), group.serving, split, window)
