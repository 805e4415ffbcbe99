-- Run by run.sh: prints the launcher's environment and the script's arguments.
print(("env RANK=%s LOCAL_RANK=%s WORLD_SIZE=%s LOCAL_WORLD_SIZE=%s MASTER_ADDR=%s MASTER_PORT=%s args=%s"):format(
  os.getenv("RANK"), os.getenv("LOCAL_RANK"), os.getenv("WORLD_SIZE"), os.getenv("LOCAL_WORLD_SIZE"),
  os.getenv("MASTER_ADDR"), os.getenv("MASTER_PORT"), table.concat(arg, ",")))
os.exit(tonumber(os.getenv("RANK")) == 2 and 3 or 0)
