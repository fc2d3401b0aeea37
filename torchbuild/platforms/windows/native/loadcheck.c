/* loadcheck: load DLLs the way Python >= 3.8 loads extension modules and torch loads its DLLs, and say for each
 * whether it loaded. Built with mingw-w64 by torchbuild/loadcheck.py; needs no Python and no VC runtime (it imports
 * only KERNEL32 and msvcrt).
 *
 *   loadcheck.exe [-d DIR] ... FILE ... [-d DIR] ... FILE ...
 *
 * -d DIR: AddDllDirectory(DIR), as os.add_dll_directory does (torch\lib, torch.libs, Library\bin); it applies to
 * every FILE after it. FILE: LoadLibraryExW(FILE, LOAD_LIBRARY_SEARCH_DEFAULT_DIRS | LOAD_LIBRARY_SEARCH_DLL_LOAD_DIR),
 * the flags CPython passes for an extension module. The process's default search is set to
 * LOAD_LIBRARY_SEARCH_DEFAULT_DIRS (application directory, System32, the added directories), as CPython sets it.
 *
 * Prints one line per FILE on stdout, unbuffered, in order: "OK <path>" or "FAIL <path> <GetLastError> <message>".
 * Exit code: the number of failures (at most 254); 255 when the search path could not be set up.
 * Loaded DLLs stay loaded: a later FILE may find an earlier one already in memory, as in a real process. */
#include <windows.h>
#include <stdio.h>
#include <wchar.h>

static void message(DWORD code, wchar_t *buf, DWORD size) {
    DWORD len = FormatMessageW(FORMAT_MESSAGE_FROM_SYSTEM | FORMAT_MESSAGE_IGNORE_INSERTS, NULL, code, 0, buf, size,
                               NULL);
    if (!len) {
        swprintf(buf, size, L"(no message)");
        return;
    }
    while (len && (buf[len - 1] == L'\r' || buf[len - 1] == L'\n' || buf[len - 1] == L' ')) buf[--len] = 0;
}

int wmain(int argc, wchar_t **argv) {
    int failures = 0;
    wchar_t text[512];
    wchar_t full[32768];
    setvbuf(stdout, NULL, _IONBF, 0);
    SetErrorMode(SEM_FAILCRITICALERRORS | SEM_NOOPENFILEERRORBOX);
    if (!SetDefaultDllDirectories(LOAD_LIBRARY_SEARCH_DEFAULT_DIRS)) {
        DWORD code = GetLastError();
        message(code, text, 512);
        wprintf(L"ERROR SetDefaultDllDirectories %lu %ls\n", code, text);
        return 255;
    }
    for (int i = 1; i < argc; i++) {
        if (!wcscmp(argv[i], L"-d") && i + 1 < argc) {
            GetFullPathNameW(argv[++i], 32768, full, NULL);
            if (!AddDllDirectory(full)) {
                DWORD code = GetLastError();
                message(code, text, 512);
                wprintf(L"ERROR AddDllDirectory %ls %lu %ls\n", full, code, text);
                return 255;
            }
            continue;
        }
        GetFullPathNameW(argv[i], 32768, full, NULL);
        HMODULE module = LoadLibraryExW(full, NULL, LOAD_LIBRARY_SEARCH_DEFAULT_DIRS | LOAD_LIBRARY_SEARCH_DLL_LOAD_DIR);
        if (module) {
            wprintf(L"OK %ls\n", full);
        } else {
            DWORD code = GetLastError();
            message(code, text, 512);
            wprintf(L"FAIL %ls %lu %ls\n", full, code, text);
            failures++;
        }
    }
    return failures > 254 ? 254 : failures;
}
