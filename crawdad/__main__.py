from crawdad.cli import main

main()
