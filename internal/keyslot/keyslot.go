// Package keyslot computes the Redis Cluster slot of a key: CRC16 of its hash tag (the text between
// its first '{' and the next '}', when not empty, else the whole key) modulo 16384. The shard and
// stripe pickers need the slot of candidate names before any key of theirs exists.
package keyslot

// Slots is the number of Redis Cluster hash slots.
const Slots = 16384

// Of is the cluster slot of key.
func Of(key string) int {
	return int(crc16([]byte(hashTag(key))) % Slots)
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

// Spread is a hash tag base+"~"+k for the i-th of n names spread over the slots: k is the
// smallest whose slot lies in the i-th of n equal slot ranges. Clusters split their slots in
// contiguous ranges among the masters, so n such names land on the masters in proportion to
// the slots each serves, the same names in every process.
func Spread(base string, i, n int) string {
	lo, hi := i*Slots/n, (i+1)*Slots/n
	for k := 0; ; k++ {
		tag := base + "~" + itoa(k)
		if s := int(crc16([]byte(tag)) % Slots); s >= lo && s < hi {
			return tag
		}
	}
}

func itoa(k int) string {
	if k == 0 {
		return "0"
	}
	var b [20]byte
	i := len(b)
	for ; k > 0; k /= 10 {
		i--
		b[i] = byte('0' + k%10)
	}
	return string(b[i:])
}
