/*
 * log.c - pinshmd's log.
 */
#include <stdarg.h>
#include <stdio.h>
#include <unistd.h>

#include "log.h"

static bool log_stderr = true; /* foreground: stderr only */
static bool log_both;          /* syslog, and warnings and errors on stderr while starting */
static int log_max = LOG_NOTICE;

void log_open(bool to_stderr, int verbose)
{
	log_stderr = to_stderr;
	log_max = verbose <= 0 ? LOG_NOTICE : verbose == 1 ? LOG_INFO : LOG_DEBUG;
	if (!to_stderr)
		openlog("pinshmd", LOG_PID | LOG_NDELAY, LOG_DAEMON);
}

void log_to_stderr_too(bool on)
{
	log_both = on;
}

void log_close(void)
{
	if (!log_stderr)
		closelog();
}

static const char *level_name(int level)
{
	switch (level) {
	case LOG_EMERG:
	case LOG_ALERT:
	case LOG_CRIT:
	case LOG_ERR:
		return "error";
	case LOG_WARNING:
		return "warning";
	case LOG_NOTICE:
		return "notice";
	case LOG_INFO:
		return "info";
	default:
		return "debug";
	}
}

/* One write per line, so that the lines of several processes do not mix. */
static void write_stderr(int level, const char *fmt, va_list ap)
{
	char line[1024];
	int n = snprintf(line, sizeof(line), "pinshmd[%ld]: %s: ", (long)getpid(), level_name(level));

	if (n < 0 || (size_t)n >= sizeof(line) - 1)
		n = 0;
	int m = vsnprintf(line + n, sizeof(line) - (size_t)n - 1, fmt, ap);
	if (m < 0)
		m = 0;
	size_t len = (size_t)n + (size_t)m;
	if (len > sizeof(line) - 2)
		len = sizeof(line) - 2;
	line[len++] = '\n';
	ssize_t ignored = write(STDERR_FILENO, line, len);
	(void)ignored;
}

void log_msg(int level, const char *fmt, ...)
{
	va_list ap;

	if (level > log_max)
		return;
	va_start(ap, fmt);
	if (log_stderr) {
		write_stderr(level, fmt, ap);
	} else {
		if (log_both && level <= LOG_WARNING) {
			va_list copy;
			va_copy(copy, ap);
			write_stderr(level, fmt, copy);
			va_end(copy);
		}
		vsyslog(level, fmt, ap);
	}
	va_end(ap);
}
