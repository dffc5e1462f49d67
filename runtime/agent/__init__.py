"""The agent: phases, turns of steps, the inbox, and stops that settle honestly."""
