/*
 * ctl_output.h - how pinshmctl prints what the daemon reports: a table for
 * people, JSON for programs, and the small conversions both need.
 *
 * The JSON is valid whatever the strings hold: every string goes through
 * ctl_json_string(), which escapes quotes, backslashes and control
 * characters and replaces bytes that are not UTF-8 with U+FFFD (channel
 * names are restricted by the daemon, user and group names are not).
 */
#ifndef PINSHM_CTL_OUTPUT_H
#define PINSHM_CTL_OUTPUT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <pinshm.h>

/**
 * Parse a size: decimal digits, then an optional k, m or g (either case,
 * powers of 1024).
 * @return 0, or -EINVAL (not a size) / -ERANGE (does not fit 64 bits).
 */
int ctl_parse_size(const char *s, uint64_t *out);

/** Write permission bits @p mode (0..0777) as "rwxr-x---" into @p buf (10 bytes at least). */
void ctl_mode_string(uint32_t mode, char *buf);

/** Write @p bytes as "512", "64K", "1.5M" ... into @p buf. */
void ctl_size_string(uint64_t bytes, char *buf, size_t len);

/** Write @p s as a JSON string, quotes included. */
void ctl_json_string(FILE *out, const char *s);

/** @return the drops of a channel: its lost and refused messages (saturated). */
uint64_t ctl_drops(const pinshm_list_entry_t *e);

/** @return "memfd", "shm" ("shm!" when damaged: shrunk by a client) or "?". */
const char *ctl_backend_name(const pinshm_list_entry_t *e);

/** Print channels as an aligned table with a header line. */
void ctl_print_table(FILE *out, const pinshm_list_entry_t *e, size_t n);

/** Print channels as a JSON array of objects, one per channel. */
void ctl_print_json(FILE *out, const pinshm_list_entry_t *e, size_t n);

/** Print one channel, one "key  value" line per field. */
void ctl_print_stat(FILE *out, const pinshm_list_entry_t *e);

/** Print one channel as a JSON object (the members of ctl_print_json()'s). */
void ctl_print_stat_json(FILE *out, const pinshm_list_entry_t *e);

/** Write @p ms as "3s", "2m05s", "1h02m03s", "4d03h02m" into @p buf. */
void ctl_duration_string(uint64_t ms, char *buf, size_t len);

/** Print the daemon's figures and its pool's (@p pool may be NULL: not
 *  shown), then a table of the pool's classes and one of @p n users. */
void ctl_print_status(FILE *out, const pinshm_status_t *st, const pinshm_pool_t *pool, const pinshm_user_usage_t *u,
		      size_t n);

/** Print the same as one JSON object, the pool as an object and the users
 *  as an array in it. */
void ctl_print_status_json(FILE *out, const pinshm_status_t *st, const pinshm_pool_t *pool,
			   const pinshm_user_usage_t *u, size_t n);

/** Print connections as an aligned table with a header line. */
void ctl_print_clients(FILE *out, const pinshm_client_info_t *c, size_t n);

/** Print connections as a JSON array of objects, one per connection. */
void ctl_print_clients_json(FILE *out, const pinshm_client_info_t *c, size_t n);

#endif /* PINSHM_CTL_OUTPUT_H */
