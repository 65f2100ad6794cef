#ifndef BATON_CLIBPQ_SHIM_H
#define BATON_CLIBPQ_SHIM_H
#include <libpq-fe.h>
#endif
