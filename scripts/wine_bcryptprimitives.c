/* bcryptprimitives.dll for Wine 8.0, which has none: Rust's std (1.78+) imports ProcessPrng from it, so uv.exe and
   the Rust extension modules (rattler, rattler_build, rpds) fail to load ("Library bcryptprimitives.dll ... not
   found", status c0000135). Only for the Windows host under Wine (scripts/wine_host.py); Windows 10+ has it. */
#include <windows.h>

BOOLEAN WINAPI SystemFunction036(PVOID buffer, ULONG length); /* RtlGenRandom, advapi32 */

__declspec(dllexport) BOOL WINAPI ProcessPrng(PBYTE data, SIZE_T length) {
    while (length > 0) {
        ULONG chunk = length > 0x10000000 ? 0x10000000 : (ULONG)length;
        if (!SystemFunction036(data, chunk)) return FALSE;
        data += chunk;
        length -= chunk;
    }
    return TRUE;
}
