package middleware

// Redis Cluster puts a key in slot CRC16(tag) mod 16384, tag being the key's hash tag (the text
// between its first '{' and the next '}', when not empty) or else the whole key. The shard
// picker needs the slot of candidate queue names before any key of theirs exists.

// clusterSlots is the number of Redis Cluster hash slots.
const clusterSlots = 16384

// keySlot is the cluster slot of key.
func keySlot(key string) int {
	return int(crc16([]byte(hashTag(key))) % clusterSlots)
}

// hashTag is the part of key that Redis Cluster hashes.
func hashTag(key string) string {
	for i := 0; i < len(key); i++ {
		if key[i] != '{' {
			continue
		}
		for j := i + 1; j < len(key); j++ {
			if key[j] == '}' {
				if j == i+1 {
					return key // "{}": the whole key
				}
				return key[i+1 : j]
			}
		}
		return key // no closing brace
	}
	return key
}

// crc16 is CRC-16/XMODEM (polynomial 0x1021, initial 0), Redis Cluster's key hash.
func crc16(b []byte) uint16 {
	var crc uint16
	for _, c := range b {
		crc ^= uint16(c) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc
}

// asynqQueueSlot is the slot of asynq's keys of queue (asynq:{<queue>}:pending and the rest).
func asynqQueueSlot(queue string) int { return keySlot("asynq:{" + queue + "}:pending") }
