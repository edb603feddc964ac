"""Stage 3: the rewrite. nodes.py puts each planned lowering in its leftover's place; regions.py removes
what is dead of a replaced dynamo region; bodies.py writes the leftovers inside If/Loop/Scan bodies."""
