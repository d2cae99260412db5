"""Pure decisions. Nothing here does I/O or reads the clock: observations and `now` come in as arguments,
decisions go out as values, and the services carry them out."""
