from cliff_tui.cli import main

raise SystemExit(main())
