#ifndef BATON_COPENSSL_SHIM_H
#define BATON_COPENSSL_SHIM_H
// Only what JOSE uses of OpenSSL 3.
#include <openssl/evp.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/bn.h>
#include <openssl/core_names.h>
#include <openssl/param_build.h>
#include <openssl/params.h>
#include <openssl/ecdsa.h>
#include <openssl/rand.h>
#include <openssl/sha.h>
#include <openssl/crypto.h>
#endif
