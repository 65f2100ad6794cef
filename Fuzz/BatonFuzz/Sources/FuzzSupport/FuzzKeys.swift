// Keys of the fuzzing harness. They are test keys made for the fuzzer alone, trusted by nothing else;
// they are committed so that the seed corpus and any crash the fuzzer records stay reproducible.

/// `fuzz-1`: the RSA key whose private half the harness holds; every token it signs is legitimate.
let fuzzSigningKeyPEM = """
-----BEGIN PRIVATE KEY-----
MIIEvAIBADANBgkqhkiG9w0BAQEFAASCBKYwggSiAgEAAoIBAQC3dPU9hlT0vKkO
a9pVzI+o3fRy71lAiIQJ7rekHKqjsGe3/XxgmXJoIzSsOsGtSpdNAbMNFMl9Bn7/
aysqW8MXwskmVYrWFGNslz9aABuf3GE3zijv1gZgbn3iet6Ci9Bl5J4003GzEb6H
GDLJzMXAyff0wq72AXMiqHvI4J/qvFfO685NZ2MzecX6p3bq/A2heGRR/BWFuh27
/hIPhL9Uz3iOqoAgma4BS0sA6xmKaSK/16qYAR2b1G9XGWJycMxiMj2ZCVjWb4uk
aF+NW28c8WnX99J+Ih2rOX86TA9AMlqGHVmmTc8IWMS15cfqdxCqrZ1s7vB8QFTG
cPIVkh8BAgMBAAECggEAA2UT67NKa6v5EeX/iJJsPyL6VM0mkOnlzZxABDaulrBb
Pv2fGVeFlTU/kodU0azdb2SeaFnP37Mo0ver+RDxI4WsfLvdAZinfVkwKC1z1Wm5
19NGESgb/plU1YXSC8bkEJqiLdaS1k44AR56xB64sxhZsQsQO0esFoJZJg64Dtss
wo3tHmZuS2WloLzsXuHzzUhziXvUuUOf6tPfTIBtx3v/0zBbWRcd+D+vlySwibD7
X0ozaTZ++TZJJsUTkbbg99kxVq6HNLHx9V1l7sHDutB3GRGgFYZH2tqYI6mBkZy9
4cqANF745F3u6VLF6hfw1lM0JOVRitQnyAcSZOlGpQKBgQD+BxSuoHbTIm4U1pXO
wdP/Gw0LQXm/LT/QoQrOrl0Emdx19csfxMJDs0NZHa2o56q4+rFhP7bl5cbEakCC
Ghua/3PqY8irGiYvnXK3y6HkIDqMYX3e3T2Ara+cWkWtNqpRQtOcQtX0yG0cCRwU
JbVe0pEMkZJFFf1IEkQ1Rvk/zQKBgQC44ZtZO/7tuLd2KlaOFEu+ruUvY0jS+Xdc
QtaHOAzPEOjrBVWvUVjalJui+dICazkLF2gatkwvAzR7/6OOpPg4x1jNxcWwfD3S
mDhZkVfqmDGvfZs4Cv6aUsbyEn9lBTD2aoXZR5EgvC8mKreakkimIBW2QG3wcp8q
2eKpSONgBQKBgErGFM1uSGvPt62EmKY6ocd20/kbNdYTYLRtovvBkXnYPG+wgTEB
vtkkvE9QEB0mzDcU+/+PPKwhXcfVKtXhD30pcpps8tWCpfjgFLOLSkUXQ4Ss8dsX
LpJhDc8tN1NMQwgWbqmRdt9N2+gjulMn4mJeAvo7I14YoeyEC/XOxXGFAoGAGbX2
PrCjQTgA+4PjyZp09i2oXbC2/fAHc2MwJlnbHijB231Ab0Mm0i78feu0EvYKVsqI
hb54VcliUSQ6AKpcgrjmVqd8WJDOoCzfGUWnLk7ACiGzplWRFrEQTbXY1ZmlN3+U
4aScQCsre2lRY0OYqtGnc1L+dwPZssHeTaB/TmkCgYABOTCXQ+ABJn1jRJJ5cROG
oC1KNU9jEhGs4jkCiaRLJfg7cpl/SC2Pzk0XqaAmeoocNo2o2p0lo24Ygxj+YJZQ
3EVp0bGJhty8Gzns+azGk9h/6hAWJmgHP3yMWylWN4iIyM8KiDM9OGGWsVGM+PkS
RipTUPQT2VQz50ZqkC9fHA==
-----END PRIVATE KEY-----
"""

/// `fuzz-ec`: a P-256 key published in the key set for ES256; the verifier accepts RS256 only, so a token
/// correctly signed with it must still be refused.
let fuzzECKeyPEM = """
-----BEGIN PRIVATE KEY-----
MIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQgZtvEPm4bpWw2x7cb
6b8/dD4tl7pciG9KLaHy8rZkSGihRANCAAQ6EzztQeCh9csulUwFGgTFFhfyAcy9
ClNj+J0lr1b3bS/30zNXB0E4ix46Ab73uRKeSoelxdxedYyYVMDB49yN
-----END PRIVATE KEY-----
"""

/// `fuzz-2`: the modulus (base64url) of an RSA key in the key set whose private half was discarded:
/// no token can legitimately verify under it.
let fuzzUnknownModulus = "1QjH_vX_TCj_kqsU7ccrnh5mx9rljdkxcrn1m_ttkzrhEUNuGF1H3PZs7fZZKn7-rjZNxVp6xf2Krzx_sxVL0AUhBQvbQ5a1QAntkTKwOF1JsYVvZpLlZmedO5f72_nhmWiMytcy-GVg0t-7Ak4aOQd_RkBmxwRjYububnRs6GNcxuaV8QNSL2WrXNeW4ECB3IcUI9BxqBcpLO1QZD6Gmpozjl1lSxuScPDhIG63UVK2CcM_Zms1fujsGl5IiQfQT7N3F68QG5fcH5vzNLuJClYdIyocNmNlGRBGef4amRQ1cBcQyg6U8jpq3Jf3rEixfJJSrlQP7w8Kc_S_gCpNSQ"
