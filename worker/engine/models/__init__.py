"""Models: finding, loading, saving and converting them, and the engine plan decided once per loaded model; docs/architecture.md, "Engine by stage"."""
