"""How often each computation runs: trip counts of while loops (found, evaluated, overridden
or unknown) and execution counts from ENTRY through the call graph."""
