from factory.cli import main

raise SystemExit(main())
