"""The pin step: before the runner starts, every selected cell's Plan is made final (pin.py), its companions pinned
to the torch release chosen (pin_companions.py), the users' own builds read (own_build.py), and the package indexes'
answers probed (index_probe.py) and kept (index_memo.py)."""
