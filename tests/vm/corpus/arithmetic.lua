-- Every arithmetic and bitwise opcode: register, constant and immediate forms, and their MMBINs.
local a, b = ...
local i = 7
local f = 2.5
local s = "10"
local r = {}
r[1] = a + b; r[2] = a - b; r[3] = a * b; r[4] = a % b; r[5] = a ^ b
r[6] = a / b; r[7] = a // b; r[8] = a & b; r[9] = a | b; r[10] = a ~ b
r[11] = a << b; r[12] = a >> b
r[13] = a + 1; r[14] = a - 3; r[15] = a + 300; r[16] = a * 2.5; r[17] = a % 7
r[18] = a ^ 2; r[19] = a / 4; r[20] = a // 3; r[21] = a - 1000
r[22] = a & 0xff; r[23] = a | 8; r[24] = a ~ 3
r[25] = a >> 2; r[26] = a << 2; r[27] = 1 << a; r[28] = 3 - a; r[29] = 2 ^ a
r[30] = -a; r[31] = ~b; r[32] = not a; r[33] = #s
r[34] = s .. i .. f
r[35] = i * f + (s + 1)
r[36] = 1e300 * 10; r[37] = 0.5; r[38] = -0.0; r[39] = 3.0; r[40] = 1e15; r[41] = 2^53
r[42] = math.maxinteger; r[43] = math.mininteger; r[44] = 1/0; r[45] = -1/0
r[46] = "a\0b\1\255\t\"\\" .. 'quote\'s'
return r
