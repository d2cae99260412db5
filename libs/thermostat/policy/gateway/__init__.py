"""The inference gateway's decisions: what a request for a model meets, and what it is answered (issue 34)."""
