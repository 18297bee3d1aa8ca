"""Independent oracles shared by the numerics tests."""
import ml_dtypes

#: ml_dtypes' element types: the test oracle for every MX floating-point element cast.
ML_DTYPES = {
    "mxfp4": ml_dtypes.float4_e2m1fn,
    "mxfp6_e2m3": ml_dtypes.float6_e2m3fn,
    "mxfp6_e3m2": ml_dtypes.float6_e3m2fn,
    "mxfp8_e4m3": ml_dtypes.float8_e4m3fn,
    "mxfp8_e5m2": ml_dtypes.float8_e5m2,
}
