/*
 * Compile-time check of rdkafka_abi.h (kafkaprod.c's hand declarations) against a real rdkafka.h:
 * every field offset and size of the two structures kafkaprod.c shares with librdkafka, every
 * constant it passes, and every function signature it calls through dlsym. It compiles (with
 * -fsyntax-only) or fails naming what moved. tests/test_rdkafka_abi.py runs it against the
 * rdkafka.h of the librdkafka release confluent-kafka bundles (see the Makefile's rdkafka-header).
 */
#include <stddef.h>
#include <rdkafka.h>

#define RK_ABI_CHECK 1
typedef rd_kafka_t rk_t;
typedef rd_kafka_conf_t rk_conf_t;
typedef rd_kafka_topic_t rk_topic_t;
typedef rd_kafka_error_t rk_error_t;
typedef rd_kafka_headers_t rk_headers_t;
#define RK_ERR rd_kafka_resp_err_t
#define RK_CONF_RES rd_kafka_conf_res_t
#define RK_TYPE rd_kafka_type_t
#define RK_MESSAGE rd_kafka_message_t
#define RK_VU rd_kafka_vu_t
#include "rdkafka_abi.h"

#define SAME_FIELD(ours, theirs, f)                                                           \
    _Static_assert(offsetof(ours, f) == offsetof(theirs, f), #theirs "." #f " moved");        \
    _Static_assert(sizeof(((ours *)0)->f) == sizeof(((theirs *)0)->f), #theirs "." #f " changed size");

SAME_FIELD(rk_message_t, rd_kafka_message_t, err)
SAME_FIELD(rk_message_t, rd_kafka_message_t, rkt)
SAME_FIELD(rk_message_t, rd_kafka_message_t, partition)
SAME_FIELD(rk_message_t, rd_kafka_message_t, payload)
SAME_FIELD(rk_message_t, rd_kafka_message_t, len)
SAME_FIELD(rk_message_t, rd_kafka_message_t, key)
SAME_FIELD(rk_message_t, rd_kafka_message_t, key_len)
SAME_FIELD(rk_message_t, rd_kafka_message_t, offset)
SAME_FIELD(rk_message_t, rd_kafka_message_t, _private)
_Static_assert(sizeof(rk_message_t) == sizeof(rd_kafka_message_t), "rd_kafka_message_t changed size");

SAME_FIELD(rk_vu_t, rd_kafka_vu_t, vtype)
SAME_FIELD(rk_vu_t, rd_kafka_vu_t, u)
SAME_FIELD(rk_vu_t, rd_kafka_vu_t, u.cstr)
SAME_FIELD(rk_vu_t, rd_kafka_vu_t, u.i)
SAME_FIELD(rk_vu_t, rd_kafka_vu_t, u.i32)
SAME_FIELD(rk_vu_t, rd_kafka_vu_t, u.mem.ptr)
SAME_FIELD(rk_vu_t, rd_kafka_vu_t, u.mem.size)
SAME_FIELD(rk_vu_t, rd_kafka_vu_t, u.headers)
SAME_FIELD(rk_vu_t, rd_kafka_vu_t, u.ptr)
_Static_assert(sizeof(rk_vu_t) == sizeof(rd_kafka_vu_t), "rd_kafka_vu_t changed size");
/* kafkaprod.c stores the enums in int fields and passes them as int */
_Static_assert(sizeof(rd_kafka_resp_err_t) == sizeof(int) && (rd_kafka_resp_err_t)-1 < 0, "rd_kafka_resp_err_t is not an int");
_Static_assert(sizeof(rd_kafka_vtype_t) == sizeof(int), "rd_kafka_vtype_t is not an int");
_Static_assert(sizeof(rd_kafka_type_t) == sizeof(int), "rd_kafka_type_t is not an int");
_Static_assert(sizeof(rd_kafka_conf_res_t) == sizeof(int), "rd_kafka_conf_res_t is not an int");

#define SAME_CONST(ours, theirs) _Static_assert((long)(ours) == (long)(theirs), #theirs " changed value");
SAME_CONST(VT_END, RD_KAFKA_VTYPE_END)
SAME_CONST(VT_TOPIC, RD_KAFKA_VTYPE_TOPIC)
SAME_CONST(VT_RKT, RD_KAFKA_VTYPE_RKT)
SAME_CONST(VT_PARTITION, RD_KAFKA_VTYPE_PARTITION)
SAME_CONST(VT_VALUE, RD_KAFKA_VTYPE_VALUE)
SAME_CONST(VT_KEY, RD_KAFKA_VTYPE_KEY)
SAME_CONST(VT_OPAQUE, RD_KAFKA_VTYPE_OPAQUE)
SAME_CONST(VT_MSGFLAGS, RD_KAFKA_VTYPE_MSGFLAGS)
SAME_CONST(VT_TIMESTAMP, RD_KAFKA_VTYPE_TIMESTAMP)
SAME_CONST(VT_HEADER, RD_KAFKA_VTYPE_HEADER)
SAME_CONST(VT_HEADERS, RD_KAFKA_VTYPE_HEADERS)
SAME_CONST(ERR_AUTHENTICATION, RD_KAFKA_RESP_ERR__AUTHENTICATION)
SAME_CONST(ERR_SSL, RD_KAFKA_RESP_ERR__SSL)
SAME_CONST(ERR_QUEUE_FULL, RD_KAFKA_RESP_ERR__QUEUE_FULL)
SAME_CONST(ERR_INVALID_ARG, RD_KAFKA_RESP_ERR__INVALID_ARG)
SAME_CONST(MSG_F_FREE, RD_KAFKA_MSG_F_FREE)
SAME_CONST(MSG_F_COPY, RD_KAFKA_MSG_F_COPY)
SAME_CONST(RK_PRODUCER, RD_KAFKA_PRODUCER)

/* Every function kafkaprod.c resolves has exactly the declared signature. */
#define SAME_SIGNATURE(field, sym, ret, params) \
    _Static_assert(__builtin_types_compatible_p(__typeof__(&sym), ret(*) params), #sym " has another signature");
RK_FUNCTIONS(SAME_SIGNATURE)

/* The header's version, for the test to compare with the bundled library's. */
const int rdkafka_abi_checked_version = RD_KAFKA_VERSION;
