"""Redis adapters: key names (``keys``), encodings (``codec``), atomic state access (``state``)."""
