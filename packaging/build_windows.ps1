# Builds the Windows bundle dist\spectune\: spectune.exe (the CLI, and the engine worker)
# and spectune-gui.exe (the desktop, no console window). NOT RUN YET on Windows: written and
# reviewed on Linux only; packaging/README.md lists what to check on the first run. The same
# backend layout, cross-built with mingw-w64, runs under Wine: packaging/wine_check.sh.
#
#   powershell -ExecutionPolicy Bypass -File packaging\build_windows.ps1 [-Cuda] [-CudaArchitectures "86;89"]
#
# Needs: Python 3.11 (the py launcher), the Visual Studio 2022 Build Tools with the
# "Desktop development with C++" workload (MSVC, the Windows SDK, CMake), and for
# -Cuda the CUDA toolkit (12.4 or newer; its installer sets CUDA_PATH). Run it from
# a "Developer PowerShell for VS 2022" so that cl.exe is on PATH.
param(
    [switch]$Cuda,
    [string]$CudaArchitectures = "",
    [string]$Venv = "build\pkgenv"
)
$ErrorActionPreference = "Stop"
# the one pin: pyproject.toml's "llama-cpp-python==VERSION"
$LlamaVersion = (Select-String -Path (Join-Path $PSScriptRoot "..\pyproject.toml") -Pattern '"llama-cpp-python==([^"]+)"').Matches[0].Groups[1].Value
$Root = Split-Path -Parent $PSScriptRoot
Set-Location $Root

function Invoke-Checked([string]$What, [scriptblock]$Block) {
    & $Block
    if ($LASTEXITCODE -ne 0) { throw "build_windows.ps1: $What failed (exit $LASTEXITCODE)" }
}

foreach ($tool in @("cmake", "cl")) {
    if (-not (Get-Command $tool -ErrorAction SilentlyContinue)) {
        throw "build_windows.ps1: '$tool' is not on PATH; run this from a Developer PowerShell for VS 2022"
    }
}
if ($Cuda -and -not $env:CUDA_PATH) { throw "build_windows.ps1: -Cuda needs the CUDA toolkit (CUDA_PATH is not set)" }

# --- 1. the build venv with SpecTune's dependencies and PyInstaller ---------------------
if (-not (Test-Path "$Venv\Scripts\python.exe")) { Invoke-Checked "creating the venv" { py -3.11 -m venv $Venv } }
$Py = Join-Path $Root "$Venv\Scripts\python.exe"
$Deps = & $Py -c "import tomllib; d = tomllib.load(open('pyproject.toml', 'rb'))['project']['dependencies']; print(' '.join(x for x in d if not x.startswith('llama-cpp-python')))"
Invoke-Checked "installing the dependencies" { & $Py -m pip install -q ($Deps -split ' ') pyinstaller==6.22.3 pyinstaller-hooks-contrib==2026.9 }

# --- 2. llama-cpp-python with the server tools (and CUDA), the backend layout of the Linux build ---
# As scripts/setup.sh builds it: every ggml backend is a module loaded at run time (GGML_BACKEND_DL), the
# CPU backend once per x86-64 level (GGML_CPU_ALL_VARIANTS: ggml loads the best one the CPU runs; MSVC
# builds 9 of the 14 levels, without ivybridge, piledriver, cooperlake, zen4 and sapphirerapids), nothing
# compiled for this machine's CPU (GGML_NATIVE=OFF). The modules install into bin\ beside llama-server.exe,
# which looks for them in its own folder, and so does the engine (engine.llama.backends). With -Cuda,
# ggml-cuda.dll is one more module there.
$CmakeArgs = "-DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_SERVER=ON -DLLAVA_BUILD=OFF -DLLAMA_USE_PREBUILT_UI=OFF " +
             "-DLLAMA_TOOLS_INSTALL=ON -DGGML_NATIVE=OFF -DGGML_BACKEND_DL=ON -DGGML_CPU_ALL_VARIANTS=ON"
if ($Cuda) {
    $CmakeArgs += " -DGGML_CUDA=on"
    if (-not $CudaArchitectures) { $CudaArchitectures = & $Py packaging\cuda_arch.py }
    if ($LASTEXITCODE -ne 0 -or -not $CudaArchitectures) { throw "build_windows.ps1: no CUDA architectures (see cuda_arch.py's message)" }
    $CmakeArgs += " -DCMAKE_CUDA_ARCHITECTURES=$CudaArchitectures"
}
$env:CMAKE_ARGS = $CmakeArgs
$env:CMAKE_BUILD_PARALLEL_LEVEL = "$env:NUMBER_OF_PROCESSORS"
Write-Host "[build] llama-cpp-python $LlamaVersion with CMAKE_ARGS=$CmakeArgs (10-40 minutes)"
Invoke-Checked "building llama-cpp-python" { & $Py -m pip install --no-cache-dir --force-reinstall --no-deps "llama-cpp-python==$LlamaVersion" }
$Site = & $Py -c "import sysconfig; print(sysconfig.get_paths()['purelib'])"
$CpuModules = @(Get-ChildItem "$Site\bin\ggml-cpu-*.dll" -ErrorAction SilentlyContinue)
if ($CpuModules.Count -eq 0) { throw "build_windows.ps1: no ggml-cpu-*.dll in $Site\bin; the wheel was not built with GGML_BACKEND_DL" }
Write-Host "[build] $($CpuModules.Count) CPU backend modules in $Site\bin"
Invoke-Checked "llama-server.exe --list-devices" { & "$Site\bin\llama-server.exe" --list-devices }

# --- 3. native/ (specrt.dll) against it, with CMake and MSVC ------------------------------
# The wheel installs headers in include\, import libraries in lib\, DLLs in bin\; common\*.h comes from the sdist.
$Sdist = Join-Path $Root "build\sdist"
if (-not (Test-Path "$Sdist\llama_cpp_python-$LlamaVersion\vendor\llama.cpp\common")) {
    New-Item -ItemType Directory -Force $Sdist | Out-Null
    Invoke-Checked "downloading the sdist" { & $Py -m pip download -q --no-deps --no-binary :all: "llama-cpp-python==$LlamaVersion" -d $Sdist }
    Invoke-Checked "extracting the sdist" { tar -xzf "$Sdist\llama_cpp_python-$LlamaVersion.tar.gz" -C $Sdist }
}
$LlamaSrc = "$Sdist\llama_cpp_python-$LlamaVersion\vendor\llama.cpp"
Invoke-Checked "configuring native/" { cmake -S native -B build\native -DLLAMA_PREFIX="$Site" -DLLAMA_SRC="$LlamaSrc" }
Invoke-Checked "building native/" { cmake --build build\native --config Release --parallel }
$env:SPECTUNE_SPECRT = (Resolve-Path "build\native\Release\specrt.dll").Path

# --- 4. icons, PyInstaller -------------------------------------------------------------------
Invoke-Checked "making the icons" { & $Py packaging\make_icon.py }
Invoke-Checked "PyInstaller" { & $Py -m PyInstaller --noconfirm --log-level WARN --distpath dist --workpath build\pyinstaller packaging\spectune.spec }

# --- 5. a short smoke test -------------------------------------------------------------------
$Exe = Join-Path $Root "dist\spectune\spectune.exe"
Remove-Item Env:\SPECTUNE_SPECRT
Invoke-Checked "spectune server-path" { & $Exe server-path }
$env:QT_QPA_PLATFORM = "offscreen"
$Selftest = Start-Process -FilePath $Exe -ArgumentList "--selftest" -Wait -PassThru -NoNewWindow
Remove-Item Env:\QT_QPA_PLATFORM
if ($Selftest.ExitCode -ne 0) { throw "build_windows.ps1: spectune --selftest exited $($Selftest.ExitCode)" }
$Size = "{0:N0} MB" -f ((Get-ChildItem dist\spectune -Recurse | Measure-Object -Property Length -Sum).Sum / 1MB)
Write-Host "[build] dist\spectune ($Size): spectune.exe (CLI), spectune-gui.exe (desktop); selftest passed"
