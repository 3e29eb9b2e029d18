from zhin_cli._cli import main

main()
