/*
 * The few Node-API declarations the native addon uses (js_native_api.h / node_api.h, version 1
 * functions only), written out so the build does not depend on Node's headers being installed.
 * Node-API is a stable C ABI.
 */
#ifndef FA_NATIVE_NAPI_H
#define FA_NATIVE_NAPI_H
#include <stddef.h>
#include <stdint.h>

typedef struct napi_env__ *napi_env;
typedef struct napi_value__ *napi_value;
typedef struct napi_callback_info__ *napi_callback_info;
typedef int napi_status; /* napi_ok = 0 */
typedef napi_value (*napi_callback)(napi_env env, napi_callback_info info);
napi_status napi_create_function(napi_env env, const char *name, size_t length, napi_callback cb, void *data, napi_value *result);
napi_status napi_get_cb_info(napi_env env, napi_callback_info info, size_t *argc, napi_value *argv, napi_value *this_arg, void **data);
napi_status napi_get_value_int32(napi_env env, napi_value v, int32_t *result);
napi_status napi_get_value_uint32(napi_env env, napi_value v, uint32_t *result);
napi_status napi_get_value_double(napi_env env, napi_value v, double *result);
napi_status napi_create_int32(napi_env env, int32_t value, napi_value *result);
napi_status napi_create_double(napi_env env, double value, napi_value *result);
napi_status napi_create_object(napi_env env, napi_value *result);
napi_status napi_set_named_property(napi_env env, napi_value object, const char *name, napi_value value);
napi_status napi_get_typedarray_info(napi_env env, napi_value typedarray, int *type, size_t *length, void **data, napi_value *arraybuffer, size_t *byte_offset);
napi_status napi_throw_error(napi_env env, const char *code, const char *msg);
napi_status napi_get_undefined(napi_env env, napi_value *result);

typedef enum { napi_undefined, napi_null, napi_boolean, napi_number, napi_string, napi_symbol, napi_object, napi_function, napi_external, napi_bigint } napi_valuetype;
napi_status napi_typeof(napi_env env, napi_value value, napi_valuetype *result);

/* typed array kinds (napi_typedarray_type) */
#define FA_NAPI_UINT8 1
#define FA_NAPI_INT32 5
#define FA_NAPI_FLOAT32 7
#define FA_NAPI_FLOAT64 8

#define FA_API __attribute__((visibility("default")))
#endif
