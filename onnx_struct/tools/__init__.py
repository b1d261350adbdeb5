"""Human-facing renderings of models: the text description and the SVG layout diagram."""
