"""Adapters of the toolkit's methods to external training engines (verl: :mod:`.verl`)."""
