# placeholder: being written
import sys, os
os.makedirs(sys.argv[1], exist_ok=True)
