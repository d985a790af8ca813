"""Planning: what a run will do, decided once before anything runs: the machine it has, each replica's front end
and exact engine command, the serve flags read as vLLM reads them, and the engine cache's key."""
