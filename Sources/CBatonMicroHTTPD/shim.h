#ifndef BATON_CMICROHTTPD_SHIM_H
#define BATON_CMICROHTTPD_SHIM_H
#include <stdarg.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/socket.h>
#include <microhttpd.h>

/// Starts a daemon on epoll with suspend/resume allowed and the limits given (no per-address limit: libmicrohttpd's
/// closes refused connections unanswered and counts closed ones until it has cleaned them up, so the server counts
/// connections per address itself): with its own polling thread(s), or,
/// when `external_polling` is set, polled by the caller (its epoll descriptor: CMicroHTTPD_epoll_fd; then MHD_run).
/// `reuse_port` sets SO_REUSEPORT, so several daemons can listen on one port. `address` may be NULL (all
/// interfaces); `ipv6` must match its family. The variadic `MHD_start_daemon` cannot be called from Swift, hence
/// this wrapper.
static inline struct MHD_Daemon *CMicroHTTPD_start_daemon(
    uint16_t port,
    const struct sockaddr *address,
    int ipv6,
    MHD_AccessHandlerCallback handler,
    void *handler_cls,
    MHD_RequestCompletedCallback completed,
    void *completed_cls,
    MHD_NotifyConnectionCallback notify_connection,
    unsigned int connection_limit,
    unsigned int connection_timeout_seconds,
    size_t connection_memory_limit,
    unsigned int thread_pool_size,
    unsigned int listen_backlog,
    int external_polling,
    int reuse_port)
{
    unsigned int flags = MHD_USE_EPOLL | MHD_ALLOW_SUSPEND_RESUME | MHD_USE_TURBO;
    if (!external_polling) flags |= MHD_USE_INTERNAL_POLLING_THREAD;
    if (ipv6) flags |= MHD_USE_IPv6;
    struct MHD_OptionItem options[] = {
        { MHD_OPTION_NOTIFY_COMPLETED, (intptr_t) completed, completed_cls },
        { MHD_OPTION_NOTIFY_CONNECTION, (intptr_t) notify_connection, completed_cls },
        { MHD_OPTION_CONNECTION_LIMIT, (intptr_t) connection_limit, NULL },
        { MHD_OPTION_CONNECTION_TIMEOUT, (intptr_t) connection_timeout_seconds, NULL },
        { MHD_OPTION_CONNECTION_MEMORY_LIMIT, (intptr_t) connection_memory_limit, NULL },
        { MHD_OPTION_LISTEN_BACKLOG_SIZE, (intptr_t) listen_backlog, NULL },
        /* One last option, or the end: SO_REUSEPORT for external polling when asked (the option set to false
           would drop the default SO_REUSEADDR), else the thread pool when larger than one. */
        external_polling
            ? (struct MHD_OptionItem) { reuse_port ? MHD_OPTION_LISTENING_ADDRESS_REUSE : MHD_OPTION_END, 1, NULL }
            : (struct MHD_OptionItem) { thread_pool_size > 1 ? MHD_OPTION_THREAD_POOL_SIZE : MHD_OPTION_END, (intptr_t) thread_pool_size, NULL },
        { MHD_OPTION_END, 0, NULL },
    };
    if (address != NULL) {
        return MHD_start_daemon(flags, port, NULL, NULL, handler, handler_cls,
                                MHD_OPTION_SOCK_ADDR, address,
                                MHD_OPTION_ARRAY, options, MHD_OPTION_END);
    }
    return MHD_start_daemon(flags, port, NULL, NULL, handler, handler_cls,
                            MHD_OPTION_ARRAY, options, MHD_OPTION_END);
}

/// The port a daemon bound (useful after asking for port 0); 0 when unknown.
static inline uint16_t CMicroHTTPD_bound_port(struct MHD_Daemon *daemon)
{
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(daemon, MHD_DAEMON_INFO_BIND_PORT);
    return info == NULL ? 0 : info->port;
}

/// The epoll descriptor of an externally polled daemon, or -1.
static inline int CMicroHTTPD_epoll_fd(struct MHD_Daemon *daemon)
{
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(daemon, MHD_DAEMON_INFO_EPOLL_FD);
    return info == NULL ? -1 : info->epoll_fd;
}

/// Milliseconds until an externally polled daemon must run again (a connection's timeout), capped at `cap`.
static inline int CMicroHTTPD_timeout_ms(struct MHD_Daemon *daemon, int cap)
{
    MHD_UNSIGNED_LONG_LONG timeout = 0;
    if (MHD_get_timeout(daemon, &timeout) != MHD_YES || timeout > (MHD_UNSIGNED_LONG_LONG) cap) return cap;
    return (int) timeout;
}

/// The peer address of a connection, or NULL.
static inline const struct sockaddr *CMicroHTTPD_client_address(struct MHD_Connection *connection)
{
    const union MHD_ConnectionInfo *info = MHD_get_connection_info(connection, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    return info == NULL ? NULL : info->client_addr;
}

/// The socket of a connection, or -1.
static inline int CMicroHTTPD_connection_fd(struct MHD_Connection *connection)
{
    const union MHD_ConnectionInfo *info = MHD_get_connection_info(connection, MHD_CONNECTION_INFO_CONNECTION_FD);
    return info == NULL ? -1 : info->connect_fd;
}

/// The size of a connection's request head as received (request line, header lines and the empty line), or 0
/// before it is complete.
static inline size_t CMicroHTTPD_request_head_size(struct MHD_Connection *connection)
{
    const union MHD_ConnectionInfo *info = MHD_get_connection_info(connection, MHD_CONNECTION_INFO_REQUEST_HEADER_SIZE);
    return info == NULL ? 0 : info->header_size;
}

/// What the connection callback stored in the connection's socket context, or NULL.
static inline void *CMicroHTTPD_socket_context(struct MHD_Connection *connection)
{
    const union MHD_ConnectionInfo *info = MHD_get_connection_info(connection, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return info == NULL ? NULL : info->socket_context;
}

/// Whether a value returned by MHD is MHD_YES.
static inline int CMicroHTTPD_is_yes(enum MHD_Result result) { return result == MHD_YES; }

/// MHD_YES and MHD_NO for access handler results.
static inline enum MHD_Result CMicroHTTPD_yes(void) { return MHD_YES; }
static inline enum MHD_Result CMicroHTTPD_no(void) { return MHD_NO; }
#endif
