"""Model providers: where a step's stream of text, reasoning and tool calls comes from."""
