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

// Macros and macro constants JOSE needs, as functions Swift can call.
static inline long COpenSSL_BIO_get_mem_data(BIO *bio, char **data) { return BIO_get_mem_data(bio, data); }
static inline int COpenSSL_EVP_PKEY_PUBLIC_KEY(void) { return EVP_PKEY_PUBLIC_KEY; }
#endif
