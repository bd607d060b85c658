"""The five prefix-value studies (listed in :mod:`prefixvalue`), one module each (registered on import)."""
