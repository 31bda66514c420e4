"""The ledger: disclosure per speaker and period committed to the store, budgets and status."""
