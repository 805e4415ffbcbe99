// Lua runtime setup (being written).
