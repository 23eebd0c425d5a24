from cliff_tui.cli import main

# Guarded: triangulation workers are started with multiprocessing's spawn method, which imports
# the parent's __main__ module in each child.
if __name__ == "__main__":
    raise SystemExit(main())
