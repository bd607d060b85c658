"""prefixvalue package (see DEVELOPERS.md layout)."""
