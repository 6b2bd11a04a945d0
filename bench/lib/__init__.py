"""What the bench scripts share, one module per concern; nothing here is run on its own."""
