#ifndef BATON_CEPOLL_SHIM_H
#define BATON_CEPOLL_SHIM_H
/* Linux's readiness and wake-up descriptors (glibc's headers), for the event loop: Swift's Glibc module leaves
   them out. */
#include <sys/epoll.h>
#include <sys/eventfd.h>
#endif
