-- Run by run.sh under two `tcrun --nnodes 2` launchers: prints what the launcher set.
print(("nodes_env RANK=%s LOCAL_RANK=%s GROUP_RANK=%s WORLD_SIZE=%s LOCAL_WORLD_SIZE=%s MASTER_ADDR=%s MASTER_PORT=%s"):format(
  os.getenv("RANK"), os.getenv("LOCAL_RANK"), os.getenv("GROUP_RANK"), os.getenv("WORLD_SIZE"),
  os.getenv("LOCAL_WORLD_SIZE"), os.getenv("MASTER_ADDR"), os.getenv("MASTER_PORT")))
