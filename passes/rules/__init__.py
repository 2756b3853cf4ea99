"""One module per rewrite rule, each opening with the formula it matches."""
