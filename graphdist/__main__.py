from graphdist.cli import main

raise SystemExit(main())
