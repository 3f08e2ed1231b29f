"""Terminal rendering: records in, rich renderables out."""
