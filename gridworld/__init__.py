"""gridworld package (see DEVELOPERS.md layout)."""
