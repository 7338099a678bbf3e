/* TCP ends of `ploop send --to` and `ploop receive --listen`. */
#ifndef PLOOP_CLI_NET_H
#define PLOOP_CLI_NET_H

/* "HOST:PORT" or "[V6]:PORT". Both return an fd, or an exit code (> 0)
 * after printing one line; OPT names the option for messages. */
int net_connect(const char *opt, const char *addr, int *fd);
/* Binds, waits for one connection, closes the listening socket. */
int net_accept_one(const char *opt, const char *addr, int *fd);

#endif
