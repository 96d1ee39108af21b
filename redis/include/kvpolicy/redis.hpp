// kvpolicy::redis: the remote tier on Redis (optional component, target
// kvpolicy::redis, needs hiredis). A store shared by serving instances below
// their CPU tiers: keys are the namespace plus the chain hash, values carry
// a verified header, the store owns eviction. See README, "Remote tier
// (Redis)".
#pragma once

#include "kvpolicy/cache/remote_tier.hpp"
#include "kvpolicy/redis/connection.hpp"
#include "kvpolicy/redis/engine.hpp"
#include "kvpolicy/redis/identity.hpp"
#include "kvpolicy/redis/node.hpp"
#include "kvpolicy/redis/store.hpp"
#include "kvpolicy/redis/store_config.hpp"
#include "kvpolicy/redis/store_fields.hpp"
#include "kvpolicy/redis/transport.hpp"
