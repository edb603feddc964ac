"""Stage 2: the plan. model.py runs the front ends and the planner over a whole model (plan_model);
plan/planner.py picks each node's lowering; plan/pyramid.py plans the pools that read one tensor together."""
