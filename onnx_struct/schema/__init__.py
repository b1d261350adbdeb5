"""The serde layer: the only code that touches the generated bindings (_proto) or wire bytes."""
