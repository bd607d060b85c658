"""llm_harness package (see DEVELOPERS.md layout)."""
