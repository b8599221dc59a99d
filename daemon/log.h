/*
 * log.h - pinshmd's log: stderr in the foreground, syslog otherwise.
 */
#ifndef PINSHMD_LOG_H
#define PINSHMD_LOG_H

#include <stdbool.h>
#include <syslog.h>

/**
 * Start logging.  @p to_stderr: lines "pinshmd: LEVEL: message" on stderr;
 * otherwise syslog (facility daemon).  @p verbose: 0 logs notices and
 * worse, 1 adds info, 2 and more add debug.
 */
void log_open(bool to_stderr, int verbose);
void log_close(void);

/** With syslog: also write warnings and errors to stderr (while starting,
 *  before detaching). */
void log_to_stderr_too(bool on);

/** Log at syslog priority @p level (LOG_ERR, LOG_WARNING, LOG_NOTICE, LOG_INFO, LOG_DEBUG). */
void log_msg(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define log_err(...) log_msg(LOG_ERR, __VA_ARGS__)
#define log_warn(...) log_msg(LOG_WARNING, __VA_ARGS__)
#define log_notice(...) log_msg(LOG_NOTICE, __VA_ARGS__)
#define log_info(...) log_msg(LOG_INFO, __VA_ARGS__)
#define log_debug(...) log_msg(LOG_DEBUG, __VA_ARGS__)

#endif /* PINSHMD_LOG_H */
