package inventory

import "crypto/sha256"

// Inventory is a validated lab description.
type Inventory struct {
	// File is where the inventory came from ("" when built from flags), and
	// Digest the SHA-256 of the bytes it was loaded from (Watch compares it).
	File   string
	Digest [sha256.Size]byte
	// SSHConfig is the ssh_config file to consult; "none" disables it.
	SSHConfig string
	// KnownHosts overrides where host keys are checked; "" means ssh_config's
	// UserKnownHostsFile, else ~/.ssh/known_hosts.
	KnownHosts string
	// SkipBusy keeps jobs off GPUs that other users' processes are using.
	SkipBusy bool
	// BusyMemoryMB is the used memory above which a GPU counts as busy.
	BusyMemoryMB int
	// MaxGPUs caps the GPUs one run keeps busy at once in the whole lab
	// (0: no cap); --max-gpus overrides it.
	MaxGPUs int
	// Defaults holds the connection settings of the defaults section; they
	// apply after ssh_config, so they are not merged into Hosts here.
	Defaults Connection
	// Hosts in file order. Names are unique and keep their case.
	Hosts []Host
	// Hooks are the commands run on the coordinator's machine as each job
	// ends and as the run ends (the hooks key); flags override them.
	Hooks Hooks
}

// Hooks are commands run under sh -c on the coordinator's machine.
type Hooks struct {
	JobEnd, RunEnd string
}

// Connection is how to reach a host; empty fields are unset.
type Connection struct {
	Hostname     string
	Port         int
	User         string
	IdentityFile string
	ProxyJump    string
}

// Host is one machine and the GPUs jobs may use on it. The job settings
// (Workdir, Setup, Env, SlotsPerGPU) already include the defaults.
type Host struct {
	Name string
	// Line is where the host is declared (0 when the format has no lines).
	Line int
	// Local hosts run jobs on this machine, without SSH.
	Local bool
	Connection
	// GPUs lists the GPU ids; a repeated id is one more slot on that GPU.
	// It is nil when AutoGPUs is set.
	GPUs []int
	// AutoGPUs asks nvidia-smi on the host for its GPUs.
	AutoGPUs bool
	// SlotsPerGPU is how many jobs share each listed GPU.
	SlotsPerGPU int
	// Tags are the host's tags (its own and the defaults', sorted): a job
	// with tags= goes only to hosts that have all of its.
	Tags    []string
	Workdir string
	// Sync is a directory of this machine (absolute) whose snapshot, taken
	// as the run starts, is the jobs' workdir on the host.
	Sync string
	// MemMB is the GPU memory (MiB) a job declares that declares none
	// ([mem=]; 0: none, the job takes a slot). MemoryMB is each GPU's
	// memory where nvidia-smi cannot say (0: ask it); ReserveMB is kept
	// free of declared memory on each GPU; MaxPerGPU caps the jobs with
	// memory on one GPU (0: memory alone limits them).
	MemMB, MemoryMB, ReserveMB, MaxPerGPU int
	// Return are the paths (relative to the workdir, globs allowed) that
	// each job brings back into its log dir once it ends, unless the job
	// names its own.
	Return []string
	Setup  string
	// Env holds NAME=value pairs, sorted by name.
	Env []string
	// Slurm, when set, makes the host a Slurm cluster reached through its
	// login node (this host); it then has no GPUs of its own to list.
	Slurm *Slurm
	// Login is LoginPerSlot (where the login shell is bash, a slot's shell
	// reads the profile once and runs its jobs from it) or LoginPerJob (a
	// login shell per job, for a profile that must run per job).
	Login string
	// Conda names a conda env to activate before each job, Venv a venv's
	// directory, Modules the modules to load (in order); Interactive makes
	// job shells read ~/.bashrc as an interactive bash does.
	Conda       string
	Venv        string
	Modules     []string
	Interactive bool
	// Address is the host's address as the other hosts reach it (address:;
	// "": its ssh HostName): part 0 of a job over several hosts there is
	// their MASTER_ADDR. NCCLIfname, when set, is the network interface
	// NCCL uses there (nccl_ifname:, NCCL_SOCKET_IFNAME for its jobs).
	Address    string
	NCCLIfname string
}

// DefaultReserveMB is the GPU memory a host keeps free of declared
// memory unless reserve_mb says otherwise.
const DefaultReserveMB = 1024

// The values of a host's login key.
const (
	LoginPerSlot = "per_slot"
	LoginPerJob  = "per_job"
)

// HostNamed returns the host called name, or nil.
func (inv *Inventory) HostNamed(name string) *Host {
	for i := range inv.Hosts {
		if inv.Hosts[i].Name == name {
			return &inv.Hosts[i]
		}
	}
	return nil
}

// The values of a host's shell key.
const (
	ShellLogin       = "login"
	ShellInteractive = "interactive"
)

// LocalHostName is the name of this machine in an inventory made from flags.
const LocalHostName = "localhost"

// Local describes this machine with the given GPU ids (a repeated id is one
// more slot on that GPU): what --gpus builds instead of a file.
func Local(gpus []int) *Inventory {
	return &Inventory{
		SSHConfig:    "none",
		BusyMemoryMB: defaultBusyMemoryMB,
		Hosts: []Host{{
			Name:        LocalHostName,
			Local:       true,
			GPUs:        gpus,
			SlotsPerGPU: 1,
			Login:       LoginPerSlot,
		}},
	}
}

const defaultBusyMemoryMB = 500
