"""The five prefix-value studies of SPEC §4, one module each (registered on import)."""
