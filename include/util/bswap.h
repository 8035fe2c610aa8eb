/*
 * Fixed-endian fields at any address, whatever the host's byte order:
 * big-endian (SCSI CDBs, sense and parameter data are big-endian and
 * byte-aligned) and little-endian (virtio structures built byte by byte,
 * spindle-bench's --verify sector headers).  Any thread.
 */
#ifndef SPINDLE_UTIL_BSWAP_H
#define SPINDLE_UTIL_BSWAP_H

#include <stdint.h>

static inline uint16_t ld_be16(const uint8_t *p)
{
    return (uint16_t)(p[0] << 8 | p[1]);
}

static inline uint32_t ld_be24(const uint8_t *p)
{
    return (uint32_t)p[0] << 16 | (uint32_t)p[1] << 8 | p[2];
}

static inline uint32_t ld_be32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 |
           (uint32_t)p[2] << 8 | p[3];
}

static inline uint64_t ld_be64(const uint8_t *p)
{
    return (uint64_t)ld_be32(p) << 32 | ld_be32(p + 4);
}

static inline void st_be16(uint8_t *p, uint16_t v)
{
    p[0] = v >> 8;
    p[1] = v;
}

static inline void st_be24(uint8_t *p, uint32_t v)
{
    p[0] = v >> 16;
    p[1] = v >> 8;
    p[2] = v;
}

static inline void st_be32(uint8_t *p, uint32_t v)
{
    st_be16(p, v >> 16);
    st_be16(p + 2, v);
}

static inline void st_be64(uint8_t *p, uint64_t v)
{
    st_be32(p, v >> 32);
    st_be32(p + 4, v);
}

static inline uint16_t ld_le16(const uint8_t *p)
{
    return (uint16_t)(p[1] << 8 | p[0]);
}

static inline uint32_t ld_le32(const uint8_t *p)
{
    return (uint32_t)p[3] << 24 | (uint32_t)p[2] << 16 |
           (uint32_t)p[1] << 8 | p[0];
}

static inline uint64_t ld_le64(const uint8_t *p)
{
    return (uint64_t)ld_le32(p + 4) << 32 | ld_le32(p);
}

static inline void st_le16(uint8_t *p, uint16_t v)
{
    p[0] = v;
    p[1] = v >> 8;
}

static inline void st_le32(uint8_t *p, uint32_t v)
{
    st_le16(p, v);
    st_le16(p + 2, v >> 16);
}

static inline void st_le64(uint8_t *p, uint64_t v)
{
    st_le32(p, v);
    st_le32(p + 4, v >> 32);
}

#endif
