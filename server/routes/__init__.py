"""HTTP routes, one module per area; each router declares the roles it admits."""
