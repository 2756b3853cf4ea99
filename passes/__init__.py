"""Graph-to-graph rewrites over the IR (later issues: fusion, layout, head batching)."""
