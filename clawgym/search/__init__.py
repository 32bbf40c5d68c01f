"""Which layout? Every layout of a config that the trainer starts and that fits, ranked by step time.

``search(c, gpus=N, ...)`` takes a resolved config and the GPUs it may use, enumerates the layout
space (:mod:`clawgym.search.space`: colocated or split and the GPU split, actor nodes, TP, PP, CP,
EP, ETP, sequence parallel, recompute, optimizer offload, token budget, log-prob chunk, engine TP /
DP attention / EP, ``mem_fraction_static``), keeps the user's keys as constraints, and:

1. prunes by the trainer's divisibility rules on integers (no memory plan yet);
2. prices the actor side and the engine side separately (their memory and time depend only on
   their own knobs, given the GPUs each gets): the actor's peak against the GPU, the engines' KV
   cache against one trajectory at full context; the fastest few of each side go on;
3. joins them per GPU split, asks the trainer rules (``clawgym/validate/trainer_rules.py``, through
   the validation's public :data:`~clawgym.validate.core.Collector`) and the whole memory plan
   (:func:`clawgym.memory.evaluate`), and prices the step (:func:`clawgym.steptime.step_time`);
4. re-validates the best with the whole validation (:func:`clawgym.validate.check`), in rank order,
   until ``top`` pass.

The refusals of every stage are counted by rule (the validation's codes; ``memory-*`` for the memory
plan). Counts of stages 1-2 are of one side's candidates (actor or engines), not of whole layouts:
the search never builds the cross product it can rule out side by side.

``resolve_auto(plain, ...)`` is ``gpu_layout=auto``: the search for ``gpu_layout.num_gpus x
gpu_layout.num_nodes`` GPUs, the best layout applied to the config, the choice and runners-up
returned for the launch plan. ``memory_plan`` / ``attach`` are the memory plan with advice
(:mod:`clawgym.search.advice`, a search over knobs of one config).

Modules: :mod:`.layout` (the search: ``search(c, gpus=N, ...) -> SearchResult``), :mod:`.surgery`
(writing a candidate's values into a config), :mod:`.output` (``format_result``), :mod:`.constraints`
(``constraint_keys``: the keys a list of overrides sets), :mod:`.auto` (``gpu_layout=auto``:
``resolve_auto``, ``format_choice``), :mod:`.space` (the layout space) and :mod:`.advice` (the memory
plan with advice).
"""
