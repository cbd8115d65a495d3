// The scalar helpers (m_*) that the expressions of mgegraph/ops/elementwise_table.py call, for
// CUDA: the twin of mgegraph/_kernels/scalar.pxd, with the same semantics and, where the CPU
// computes with its own branch-free math (exp, log, log1p, tanh, float32 erf), the same
// instructions, so a GPU result is the CPU's bit for bit (kernels compiled without FMA
// contraction, as the CPU's are: the backend passes --fmad=false for the rendered modules).
// sqrt, floor, ceil, fmod and division are IEEE-exact on both; sin, cos, pow and float64 erf
// are libm's on the CPU and CUDA's on the GPU (within their documented ulp, not bitwise).
//
// Special values follow NumPy (elementwise_table.py's NOTE): relu(NaN) = NaN, relu(-0) = +0,
// maximum/minimum propagate NaN and give y on ties, sign(-0) = +0, integer arithmetic wraps,
// x // 0 and x % 0 are 0 for integers, INT_MIN // -1 is INT_MIN, and a float outside an
// integer's range (NaN, inf) casts to INT_MIN, as NumPy on x86.
//
// No standard headers (NVRTC has none): the integer types are spelled out; the host emulation
// (host_emu.h) provides the builtins used here.
#pragma once

typedef long long mg_i64;
typedef unsigned long long mg_u64;
#define MG_HD __device__ __forceinline__

// -- bits --------------------------------------------------------------------------------------
MG_HD float mg_f32_inf() { return __int_as_float(0x7f800000); }
MG_HD float mg_f32_nan() { return __int_as_float(0x7fc00000); }
MG_HD double mg_f64_inf() { return __longlong_as_double(0x7ff0000000000000LL); }
MG_HD double mg_f64_nan() { return __longlong_as_double(0x7ff8000000000000LL); }

// -- float32 math (scalar.pxd's vexpf, vexpm1f, vlogf, vlog1pf, vtanhf, verff) -----------------
// Literals are written (float)<double literal>, as Cython's <float> casts compile: rounded to
// double, then to float, exactly as the CPU's.
MG_HD float vexpf(float x) {
    float c = x < ((float)88.72283935546875) ? x : ((float)88.72283935546875);
    c = c > -((float)104.0) ? c : -((float)104.0);
    float t = c * ((float)1.44269504088896341) + ((float)12582912.0);
    float n = t - ((float)12582912.0);
    int ni = __float_as_int(t) - __float_as_int(((float)12582912.0));
    int n1 = ni >> 1;
    float r = c - n * ((float)0.693359375) + n * ((float)2.12194440e-4);
    float r2 = r * r;  // Estrin's scheme, as scalar.pxd's
    float p = ((((float)5.0000001201e-1) + ((float)1.6666665459e-1) * r)
               + (((float)4.1665795894e-2) + ((float)8.3334519073e-3) * r) * r2)
              + (((float)1.3981999507e-3) + ((float)1.9875691500e-4) * r) * (r2 * r2);
    float y = (p * r2 + r + ((float)1.0)) * __int_as_float((n1 + 127) << 23);
    y = y * __int_as_float((ni - n1 + 127) << 23);
    // c = -104 gives +0.0: no select; above the range inf, and NaN stays NaN, by x + inf
    return x < ((float)88.72283935546875) ? y : x + mg_f32_inf();
}

MG_HD float vlogf(float x) {
    bool tiny = x < ((float)1.17549435e-38);
    float xs = tiny ? x * ((float)8388608.0) : x;
    int bits = __float_as_int(xs);
    float e = (float)(((bits >> 23) & 0xff) - 126) - (tiny ? ((float)23.0) : ((float)0.0));
    float m = __int_as_float((bits & ~0x7f800000) | 0x3f000000);
    bool low = m < ((float)0.707106781186547524);
    e = low ? e - ((float)1.0) : e;
    m = low ? (m + m - ((float)1.0)) : (m - ((float)1.0));
    float z = m * m;
    float y = ((float)7.0376836292e-2);
    y = y * m - ((float)1.1514610310e-1);
    y = y * m + ((float)1.1676998740e-1);
    y = y * m - ((float)1.2420140846e-1);
    y = y * m + ((float)1.4249322787e-1);
    y = y * m - ((float)1.6668057665e-1);
    y = y * m + ((float)2.0000714765e-1);
    y = y * m - ((float)2.4999993993e-1);
    y = y * m + ((float)3.3333331174e-1);
    y = y * m * z - e * ((float)2.12194440e-4) - ((float)0.5) * z;
    y = m + y + e * ((float)0.693359375);
    y = x != mg_f32_inf() ? y : x;
    y = x != 0 ? y : -mg_f32_inf();
    y = x >= 0 ? y : mg_f32_nan();
    return x == x ? y : x;
}

MG_HD float vlog1pf(float x) {
    float u = x + ((float)1.0);
    float y = vlogf(u) * (x / (u - ((float)1.0)));
    y = u != ((float)1.0) ? y : x;
    return u != mg_f32_inf() ? y : u;
}

MG_HD float vexpm1f(float x) {
    float u = vexpf(x);
    float y = (u - ((float)1.0)) * (x / vlogf(u));
    y = u != ((float)1.0) ? y : x;
    y = u - ((float)1.0) != ((float)-1.0) ? y : u - ((float)1.0);
    return u != mg_f32_inf() ? y : u;
}

MG_HD float vtanhf(float x) {
    // Estrin's scheme and the ends by a select, as scalar.pxd's
    float a = fabsf(x);
    float z = x * x;
    float z2 = z * z;
    float p = ((((float)4.89352455891786e-03) + ((float)6.37261928875436e-04) * z)
               + (((float)1.48572235717979e-05) + ((float)5.12229709037114e-08) * z) * z2)
              + ((-((float)8.60467152213735e-11) + ((float)2.00018790482477e-13) * z)
                 - ((float)2.76076847742355e-16) * z2) * (z2 * z2);
    float q = (((float)4.89352518554385e-03) + ((float)2.26843463243900e-03) * z)
              + (((float)1.18534705686654e-04) + ((float)1.19825839466702e-06) * z) * z2;
    float y = p * x / q;
    y = a < ((float)7.90531110763549805) ? y : copysignf((float)1.0, x);
    return a > ((float)0.0004) ? y : x;  // tiny |x| and NaN: x itself
}

MG_HD float verff(float x) {
    float a = x > 0 ? x : -x;
    float z = x * x;
    float s = ((float)1.4807192815879218e-08);
    s = s * z - ((float)1.6365844691234924e-07);
    s = s * z + ((float)1.6462114365889246e-06);
    s = s * z - ((float)1.492565035840625e-05);
    s = s * z + ((float)0.00012055332981789664);
    s = s * z - ((float)0.0008548327023450852);
    s = s * z + ((float)0.005223977625442188);
    s = s * z - ((float)0.026866170645131252);
    s = s * z + ((float)0.11283791670955126);
    s = s * z - ((float)0.37612638903183754);
    s = (s * z + ((float)1.1283791670955126)) * x;
    float t = ((float)1.0) / (((float)1.0) + ((float)0.3275911) * a);
    float q = t * (((float)0.254829592) + t * (-((float)0.284496736) + t * (
        ((float)1.421413741) + t * (-((float)1.453152027) + t * ((float)1.061405429)))));
    float big = ((float)1.0) - q * vexpf(-z);
    big = x > 0 ? big : -big;
    return a < ((float)1.0) ? s : big;
}

// -- float64 math (scalar.pxd's vexp, vexpm1, vlog, vlog1p, vtanh) -----------------------------
MG_HD double vexp(double x) {
    double c = x < 709.782712893384 ? x : 709.782712893384;
    c = c > -745.2 ? c : -745.2;
    double t = c * 1.4426950408889634074 + 6755399441055744.0;
    double n = t - 6755399441055744.0;
    mg_i64 ni = __double_as_longlong(t) - __double_as_longlong(6755399441055744.0);
    mg_i64 n1 = ni >> 1;
    double r = c - n * 6.93145751953125e-1 - n * 1.42860682030941723212e-6;
    double rr = r * r;
    double px = r * ((1.26177193074810590878e-4 * rr + 3.02994407707441961300e-2) * rr
                     + 9.99999999999999999910e-1);
    double qx = ((3.00198505138664455042e-6 * rr + 2.52448340349684104192e-3) * rr
                 + 2.27265548208155028766e-1) * rr + 2.00000000000000000009e0;
    double y = (1.0 + 2.0 * (px / (qx - px))) * __longlong_as_double((n1 + 1023) << 52);
    y = y * __longlong_as_double((ni - n1 + 1023) << 52);
    y = x < 709.782712893384 ? y : mg_f64_inf();
    y = x > -745.2 ? y : 0.0;
    return x == x ? y : x;
}

MG_HD double vlog(double x) {
    bool tiny = x < 2.2250738585072014e-308;
    double xs = tiny ? x * 18014398509481984.0 : x;
    mg_i64 bits = __double_as_longlong(xs);
    double e = __longlong_as_double(((bits >> 52) & 0x7ff) | 0x4330000000000000LL) - (
        4503599627370496.0 + 1022.0 + (tiny ? 54.0 : 0.0));
    double m = __longlong_as_double((bits & ~0x7ff0000000000000LL) | 0x3fe0000000000000LL);
    bool low = m < 0.70710678118654752440;
    e = low ? e - 1.0 : e;
    double f = low ? (m + m - 1.0) : (m - 1.0);
    double s = f / (2.0 + f);
    double z = s * s;
    double rz = 2.0 / 23;
    rz = rz * z + 2.0 / 21;
    rz = rz * z + 2.0 / 19;
    rz = rz * z + 2.0 / 17;
    rz = rz * z + 2.0 / 15;
    rz = rz * z + 2.0 / 13;
    rz = rz * z + 2.0 / 11;
    rz = rz * z + 2.0 / 9;
    rz = rz * z + 2.0 / 7;
    rz = rz * z + 2.0 / 5;
    rz = (rz * z + 2.0 / 3) * z;
    double y = e * 6.93147180369123816490e-01 + (
        f - (s * (f - rz) - e * 1.90821492927058770002e-10));
    y = x != mg_f64_inf() ? y : x;
    y = x != 0 ? y : -mg_f64_inf();
    y = x >= 0 ? y : mg_f64_nan();
    return x == x ? y : x;
}

MG_HD double vlog1p(double x) {
    double u = x + 1.0;
    double y = vlog(u) * (x / (u - 1.0));
    y = u != 1.0 ? y : x;
    return u != mg_f64_inf() ? y : u;
}

MG_HD double vexpm1(double x) {
    double u = vexp(x);
    double y = (u - 1.0) * (x / vlog(u));
    y = u != 1.0 ? y : x;
    y = u - 1.0 != -1.0 ? y : u - 1.0;
    return u != mg_f64_inf() ? y : u;
}

MG_HD double vtanh(double x) {
    double a = x > 0 ? x : -x;
    double z = x * x;
    double s = -3.927832388331683e-05;
    s = s * z + 9.691537956929451e-05;
    s = s * z - 0.00023912911424355248;
    s = s * z + 0.000590027440945586;
    s = s * z - 0.0014558343870513183;
    s = s * z + 0.003592128036572481;
    s = s * z - 0.008863235529902197;
    s = s * z + 0.021869488536155203;
    s = s * z - 0.05396825396825397;
    s = s * z + 0.13333333333333333;
    s = s * z - 0.3333333333333333;
    s = s * z * x + x;
    double big = 1.0 - 2.0 / (vexp(a + a) + 1.0);
    big = x > 0 ? big : -big;
    return a < 0.3 ? s : big;
}

// -- the helpers the table's expressions call (elementwise_table.HELPERS) ----------------------
MG_HD float m_exp(float x) { return vexpf(x); }
MG_HD double m_exp(double x) { return vexp(x); }
MG_HD float m_expm1(float x) { return vexpm1f(x); }
MG_HD double m_expm1(double x) { return vexpm1(x); }
MG_HD float m_log(float x) { return vlogf(x); }
MG_HD double m_log(double x) { return vlog(x); }
MG_HD float m_log1p(float x) { return vlog1pf(x); }
MG_HD double m_log1p(double x) { return vlog1p(x); }
MG_HD float m_tanh(float x) { return vtanhf(x); }
MG_HD double m_tanh(double x) { return vtanh(x); }
MG_HD float m_erf(float x) { return verff(x); }
MG_HD double m_erf(double x) { return erf(x); }
MG_HD float m_sqrt(float x) { return sqrtf(x); }
MG_HD double m_sqrt(double x) { return sqrt(x); }
MG_HD float m_sin(float x) { return sinf(x); }
MG_HD double m_sin(double x) { return sin(x); }
MG_HD float m_cos(float x) { return cosf(x); }
MG_HD double m_cos(double x) { return cos(x); }
MG_HD float m_floor(float x) { return floorf(x); }
MG_HD double m_floor(double x) { return floor(x); }
MG_HD float m_ceil(float x) { return ceilf(x); }
MG_HD double m_ceil(double x) { return ceil(x); }

// trigonometric and hyperbolic functions and the two roundings (scalar.pxd's: libm's on the
// CPU, CUDA's here, within their ulp bounds; the roundings are exact on both)
MG_HD float m_tan(float x) { return tanf(x); }
MG_HD double m_tan(double x) { return tan(x); }
MG_HD float m_asin(float x) { return asinf(x); }
MG_HD double m_asin(double x) { return asin(x); }
MG_HD float m_acos(float x) { return acosf(x); }
MG_HD double m_acos(double x) { return acos(x); }
MG_HD float m_atan(float x) { return atanf(x); }
MG_HD double m_atan(double x) { return atan(x); }
MG_HD float m_atan2(float y, float x) { return atan2f(y, x); }
MG_HD double m_atan2(double y, double x) { return atan2(y, x); }
MG_HD float m_sinh(float x) { return sinhf(x); }
MG_HD double m_sinh(double x) { return sinh(x); }
MG_HD float m_cosh(float x) { return coshf(x); }
MG_HD double m_cosh(double x) { return cosh(x); }
MG_HD float m_asinh(float x) { return asinhf(x); }
MG_HD double m_asinh(double x) { return asinh(x); }
MG_HD float m_acosh(float x) { return acoshf(x); }
MG_HD double m_acosh(double x) { return acosh(x); }
MG_HD float m_atanh(float x) { return atanhf(x); }
MG_HD double m_atanh(double x) { return atanh(x); }
MG_HD float m_round(float x) { return roundf(x); }  // halves away from zero
MG_HD double m_round(double x) { return round(x); }
MG_HD float m_rint(float x) { return rintf(x); }  // halves to even
MG_HD double m_rint(double x) { return rint(x); }

// integers: wrapping arithmetic through the unsigned type (signed overflow is undefined in C)
MG_HD int m_neg_int(int x) { return (int)(0u - (unsigned)x); }
MG_HD mg_i64 m_neg_int(mg_i64 x) { return (mg_i64)(0ull - (mg_u64)x); }
MG_HD int m_add_int(int x, int y) { return (int)((unsigned)x + (unsigned)y); }
MG_HD mg_i64 m_add_int(mg_i64 x, mg_i64 y) { return (mg_i64)((mg_u64)x + (mg_u64)y); }
MG_HD int m_sub_int(int x, int y) { return (int)((unsigned)x - (unsigned)y); }
MG_HD mg_i64 m_sub_int(mg_i64 x, mg_i64 y) { return (mg_i64)((mg_u64)x - (mg_u64)y); }
MG_HD int m_mul_int(int x, int y) { return (int)((unsigned)x * (unsigned)y); }
MG_HD mg_i64 m_mul_int(mg_i64 x, mg_i64 y) { return (mg_i64)((mg_u64)x * (mg_u64)y); }

template <class T> MG_HD T mg_int_pow(T x, T y) {
    // by squaring in unsigned arithmetic (wraps as NumPy); 0 for a negative exponent, which
    // the kernels calling it report (mg_fail: the run raises, as NumPy does)
    mg_u64 result = 1, base = (mg_u64)x;
    if (y < 0) return 0;
    while (y > 0) {
        if (y & 1) result = result * base;
        base = base * base;
        y >>= 1;
    }
    return (T)result;
}
MG_HD float m_pow(float x, float y) { return powf(x, y); }
MG_HD double m_pow(double x, double y) { return pow(x, y); }
MG_HD int m_pow(int x, int y) { return mg_int_pow(x, y); }
MG_HD mg_i64 m_pow(mg_i64 x, mg_i64 y) { return mg_int_pow(x, y); }

MG_HD float m_abs(float x) { return fabsf(x); }
MG_HD double m_abs(double x) { return fabs(x); }
MG_HD int m_abs(int x) { return x < 0 ? m_neg_int(x) : x; }  // abs(INT_MIN) = INT_MIN
MG_HD mg_i64 m_abs(mg_i64 x) { return x < 0 ? m_neg_int(x) : x; }

template <class T> MG_HD T m_relu(T x) { return x <= 0 ? T(0) : x; }  // NaN stays; -0 -> +0

MG_HD float m_sign(float x) { return x > 0 ? 1.0f : (x < 0 ? -1.0f : x - x); }
MG_HD double m_sign(double x) { return x > 0 ? 1.0 : (x < 0 ? -1.0 : x - x); }
MG_HD int m_sign(int x) { return (x > 0) - (x < 0); }
MG_HD mg_i64 m_sign(mg_i64 x) { return (mg_i64)((x > 0) - (x < 0)); }

// floats: neither comparison holds for a NaN, which x + y keeps
MG_HD float m_max(float x, float y) { return x > y ? x : (y >= x ? y : x + y); }
MG_HD double m_max(double x, double y) { return x > y ? x : (y >= x ? y : x + y); }
MG_HD int m_max(int x, int y) { return x > y ? x : y; }
MG_HD mg_i64 m_max(mg_i64 x, mg_i64 y) { return x > y ? x : y; }
MG_HD float m_min(float x, float y) { return x < y ? x : (y <= x ? y : x + y); }
MG_HD double m_min(double x, double y) { return x < y ? x : (y <= x ? y : x + y); }
MG_HD int m_min(int x, int y) { return x < y ? x : y; }
MG_HD mg_i64 m_min(mg_i64 x, mg_i64 y) { return x < y ? x : y; }

// np.clip's minimum(maximum(x, lo), hi): hi wherever lo > hi (the CPU's m_clamp)
template <class T> MG_HD T m_clamp(T x, T lo, T hi) {
    T t = x < lo ? lo : x;
    return t > hi ? hi : t;
}
template <class T> MG_HD T m_select(bool c, T a, T b) { return c ? a : b; }

MG_HD float m_mod(float x, float y) {
    float r = fmodf(x, y);
    if (r != 0) return (r < 0) != (y < 0) ? r + y : r;
    return copysignf(0.0f, y);
}
MG_HD double m_mod(double x, double y) {
    double r = fmod(x, y);
    if (r != 0) return (r < 0) != (y < 0) ? r + y : r;
    return copysign(0.0, y);
}

MG_HD float mg_fmod(float x, float y) { return fmodf(x, y); }
MG_HD double mg_fmod(double x, double y) { return fmod(x, y); }
MG_HD float mg_floor(float x) { return floorf(x); }
MG_HD double mg_floor(double x) { return floor(x); }
MG_HD float mg_copysign(float x, float y) { return copysignf(x, y); }
MG_HD double mg_copysign(double x, double y) { return copysign(x, y); }

template <class T> MG_HD T mg_floor_div_float(T x, T y) {
    // NumPy's npy_divmod: (x - fmod(x, y)) / y moved to the floor, then rounded to nearest
    if (y == 0) return x / y;
    T mod = mg_fmod(x, y);
    T div = (x - mod) / y;
    if (mod != 0 && (y < 0) != (mod < 0)) div = div - 1;
    if (div != 0) {
        T whole = mg_floor(div);
        return div - whole > T(0.5) ? whole + 1 : whole;
    }
    return mg_copysign(T(0), x / y);
}
MG_HD float m_floor_div(float x, float y) { return mg_floor_div_float<float>(x, y); }
MG_HD double m_floor_div(double x, double y) { return mg_floor_div_float<double>(x, y); }

template <class T> MG_HD T m_floor_div_int(T x, T y) {
    if (y == 0) return 0;
    if (y == -1) return m_neg_int(x);  // INT_MIN / -1 traps in C
    T r = x / y;
    return (x % y != 0) && ((x < 0) != (y < 0)) ? r - 1 : r;
}

template <class T> MG_HD T m_mod_int(T x, T y) {
    if (y == 0 || y == -1) return 0;
    T r = x % y;
    return r != 0 && ((r < 0) != (y < 0)) ? r + y : r;
}
// uint8: no divisor is -1 and nothing is negative (NumPy's x // 0 and x % 0 are 0 as above)
MG_HD unsigned char m_floor_div_int(unsigned char x, unsigned char y) {
    return y == 0 ? 0 : (unsigned char)(x / y);
}
MG_HD unsigned char m_mod_int(unsigned char x, unsigned char y) {
    return y == 0 ? 0 : (unsigned char)(x % y);
}

// -- casts of floats to integers: INT_MIN for NaN, inf and out of range (x86's cvtt result) ---
MG_HD int float_to_i32(double x) {
    return x >= -2147483648.0 && x < 2147483648.0 ? (int)x : (int)0x80000000u;
}
MG_HD mg_i64 float_to_i64(double x) {
    return x >= -9223372036854775808.0 && x < 9223372036854775808.0
        ? (mg_i64)x : (mg_i64)0x8000000000000000ull;
}

// -- the epilogue activations of linear and conv2d (kernel_abi.matmul.ACTIVATION_CODES) -------
// each the elementwise op's own function, so a fused plan gives the unfused one's bits: relu,
// and relu6 as clip(x, 0, 6)
#define MG_ACT_RELU 1
#define MG_ACT_RELU6 2
template <class T> MG_HD T m_activate(T v, mg_i64 act) {
    return act == MG_ACT_RELU ? m_relu(v) : act == MG_ACT_RELU6 ? m_clamp(v, T(0), T(6)) : v;
}
